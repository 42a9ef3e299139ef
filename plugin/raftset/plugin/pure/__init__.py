"""What the plugin shows, built from what the API returned: plain data and its text, no I/O library imported."""
