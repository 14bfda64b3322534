"""The library's public face: ``Agent`` and ``Operator`` (and their asyncio twins),
which every front end calls.
"""
