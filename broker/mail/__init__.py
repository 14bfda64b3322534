"""Messages: the send transaction and its recipients, threads, acknowledgements,
the log, and full-text search.
"""
