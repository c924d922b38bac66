"""mnemex over HTTP: the same public API against a ``mnemex serve``.

Hosts that run several worker processes (several ``adk web`` workers, the LangGraph
server) cannot each open the data directory: one process owns it. They run
``mnemex serve`` once and reach it from every worker with ``mnemex.connect(url)``
(async) or ``mnemex.Client(url=...)`` (blocking): the refs are the in-process ones
over a ``RemoteHost`` that carries their typed commands (``wire``) to the server.
"""

from mnemex.remote.host import HostRef, RemoteHost, RemoteRef, RemoteSubscription
from mnemex.remote.runtime import RemoteRuntime, WireHost, connect, open_wire_runtime

__all__ = ["HostRef", "RemoteHost", "RemoteRef", "RemoteRuntime", "RemoteSubscription", "WireHost", "connect",
           "open_wire_runtime"]
