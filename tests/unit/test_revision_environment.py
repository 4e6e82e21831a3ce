"""The environment git runs in: GIT_* variables a git hook exports never reach git."""

from __future__ import annotations

from regression.repository.gitcmd import git_environment


def test_repository_and_index_variables_are_dropped() -> None:
    hook = {"GIT_DIR": "/elsewhere/.git", "GIT_INDEX_FILE": "/elsewhere/index",
            "GIT_WORK_TREE": "/elsewhere", "GIT_COMMON_DIR": "/elsewhere/.git",
            "GIT_OBJECT_DIRECTORY": "/elsewhere/objects", "GIT_PREFIX": "sub/",
            "PATH": "/usr/bin", "HOME": "/root"}
    assert git_environment(hook) == {"PATH": "/usr/bin", "HOME": "/root"}


def test_variables_for_reaching_remotes_are_kept() -> None:
    remote = {"GIT_SSH_COMMAND": "ssh -i key", "GIT_ASKPASS": "/bin/askpass",
              "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.proxy",
              "GIT_CONFIG_VALUE_0": "http://proxy:3128"}
    assert git_environment(remote) == remote
