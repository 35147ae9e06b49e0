"""dialogrl: multi-turn RL for LLM dialogue agents."""
import os

# cuBLAS reads its workspace setting once, when it starts (the first matrix product on a GPU), and deterministic
# kernels need it (run.seed_everything turns them on): set here, before any model reaches a GPU. A user's value stays.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
