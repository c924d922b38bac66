"""Short-term memory: each agent's conversations, pruned and compressed to fit a model's context.

The behaviour, its protocol, pruning, summaries and token counting are sans-io (no trio,
no kernel, no models); ``ref.py`` and ``kind.py`` join them to the runtime."""
