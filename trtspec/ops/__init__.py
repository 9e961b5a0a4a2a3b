"""The operations loop: live acceptance over a window, drift detection against the deploy-time baseline, and the
recommendation (reduce k, retrain the draft). Pure Python at import (no torch, no tritonclient)."""
