"""The references a run needs: plan what is missing, record it first or beside the check,
hand cases over, record a doubtful case again alone, prove the recording at its end.

Above the plugin: it starts processes (run/launch.py). One entry point serves every run,
`NeededReferences.obtain` (needed.py): the check run's plugins are handed the object from
above (run/entry.py); bisect and explain call it too."""
