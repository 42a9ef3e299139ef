"""The plugin's one client: the API calls its verbs make."""
