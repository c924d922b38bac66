"""Long-term memory: what each user told each application, found again by keyword,
full-text, vector and hybrid search.

The behaviour, its protocol, fields, filters and ranking are sans-io (no trio, no kernel,
no models); ``ref.py`` and ``kind.py`` join them to the runtime."""
