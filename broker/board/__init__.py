"""The board of a space: posts and standing directives, key claims, path
reservations and their patterns, and the one writer of what participants hold.
"""
