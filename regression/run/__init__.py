"""Running pytest for a reference or a candidate: the API the tasks call, jobs, the launcher."""
