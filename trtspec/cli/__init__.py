"""The click CLI: thin modules that parse, call the library, and print."""
