"""Self-play reinforcement learning (TR-RPG) on the one trainer: see docs/rl.md."""
