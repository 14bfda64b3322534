"""Getting messages to a participant: inboxes as queues with leases, turns and
transcripts, teammates' histories, doorbells (wake) and waits, following the log.
"""
