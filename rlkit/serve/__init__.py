"""The HTTP reward API: its wire protocol and the server."""
