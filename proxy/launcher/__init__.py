"""``context-engine run``: an agent through the user's background proxy, and ``stop``."""
