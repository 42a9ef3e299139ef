"""`kubectl raftset`: the day-2 verbs of raftset as a kubectl plugin.

A thin client: every verb reads what the operator publishes (status, conditions, Events,
the sidecars' records) or writes the annotation a person would write. No decision lives here;
the one ranking it shows (survivors of a quorum loss) is the operator's own function.
"""
