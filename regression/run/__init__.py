"""Running pytest for a reference or a candidate: the data types, the jobs, the launcher,
the recording, and on top the API the tasks call."""
