"""A space as files and back: the JSONL and Mailbox Protocol exports and imports,
purge (export, then delete) and copying a store into another.
"""
