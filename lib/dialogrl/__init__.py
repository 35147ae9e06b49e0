"""dialogrl: multi-turn RL for LLM dialogue agents."""
