"""Key-value state: small JSON values kept by key, per app and per (app, user), as
actors of the ``state`` kind (a session's own state is kept by its agent actor, with
its messages). Agent frameworks keep such state beside their conversations (Google
ADK's ``app:`` and ``user:`` state); here it is journaled and snapshotted like any
actor's, and read without replaying anything."""
