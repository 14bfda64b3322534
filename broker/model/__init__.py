"""What crosses the library's edge: the records it returns and the checks of what
callers pass in. Above ``store``, below every domain package.
"""
