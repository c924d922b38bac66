"""Adapters that plug mnemex into the frameworks agents are built with, each an optional
extra (``pip install 'mnemex[mcp]'``...). They use the public API only: ``mnemex``,
``mnemex.lowlevel`` and ``mnemex.config``."""
