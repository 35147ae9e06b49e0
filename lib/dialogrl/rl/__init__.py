"""Multi-turn, multi-role RL: advantages (group baselines, turn-level GAE), losses, and the trainer."""
