"""Protocol-faithful local servers (fake Telegram Bot API, ...) used by tests and benchmarks.

They speak the real wire protocol over HTTP on 127.0.0.1 so the real client libraries are
exercised; they never import those client libraries themselves.
"""
