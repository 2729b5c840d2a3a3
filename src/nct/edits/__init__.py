"""Container edits: the one model of "what a container gets", shared by every front end."""
