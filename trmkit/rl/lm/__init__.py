"""A causal language model as the TR-RPG policy: loading (a local folder or a named random shape), a byte-level
tokenizer for random shapes, chunked log-probabilities and KL, LoRA with the reference as adapters off, selective
gradient checkpointing, and an analytic memory model for the planner.

Needs the `rl` extra (`pip install -e ".[rl]"`: transformers, peft); nothing here is imported by the rest of trmkit
until the trainer's policy seam uses it."""
