"""The surfaces over the library: the CLI, the HTTP server and console, MCP, and
the remote client (client mode).
"""
