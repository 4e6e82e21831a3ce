"""The user's git repository: the one place that runs git, revisions to commits, the
reference's worktree."""
