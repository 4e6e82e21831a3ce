"""The references a run needs: plan what is missing, record it first or beside the check,
hand cases over, record a doubtful case again alone, prove the recording at its end.

Above the plugin: it starts processes (run/launch.py). The check run's plugins are handed
its `NeededReferences` from above (run/entry.py); bisect and explain call the recorder."""
