"""Adapters that make mnemex the memory of the agent frameworks people already use.

Each lives in its own module and needs its framework, installed by an optional
extra (``pip install 'mnemex[mcp]'``, ``'mnemex[openai-agents]'``); importing this
package imports none of them. Adapters use mnemex's public API only (``mnemex``,
``mnemex.lowlevel``, ``mnemex.config``).
"""
