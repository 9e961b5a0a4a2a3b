"""Training: the embedded tiny model pair (`tiny.py`) and Medusa heads (ModelOpt)."""
