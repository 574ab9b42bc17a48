"""Simulated ATOM OpenAI server: ``python3 -m atom.entrypoints.openai_server ...``."""

import atomsim_boot

atomsim_boot.ensure()
from atomdeck.sim.worker import main

if __name__ == "__main__":
    main()
