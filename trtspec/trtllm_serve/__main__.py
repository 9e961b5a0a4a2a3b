"""`python -m trtspec.trtllm_serve`: the server process (server.py)."""

import sys

from trtspec.trtllm_serve.server import main

sys.exit(main())
