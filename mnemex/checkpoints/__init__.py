"""Graph checkpoints: the ``checkpoint`` actor kind, one actor per thread.

A thread's actor keeps the checkpoints of every namespace of that thread, the
channel values they point at (each stored once per channel version, as the bytes
the framework's serializer made) and the writes pending on each checkpoint. Every
put is journaled before it is acknowledged and the state is snapshotted like any
actor's, so a thread's state is read back directly, never replayed from messages.
``mnemex.integrations.langgraph.MnemexSaver`` is the LangGraph checkpointer on it.
"""
