"""A user's own sitecustomize: the probe must still run it, in every Python process (it records each pid)."""

import os

RAN = True
_mark = os.environ.get("USER_SITE_MARK")
if _mark:
    with open(_mark, "a") as f:
        f.write(f"{os.getpid()}\n")
