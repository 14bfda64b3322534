"""Spaces and who is in them: spaces, participants and the directory, addressing,
contact policies, usage and shares, and the call gate (who is calling, what it
was granted).
"""
