"""Take the screenshots of the admin's "Held locks" page in docs/img/ (light and dark).

    python scripts/admin_screenshots.py [DIRECTORY]

The browser test tests/admin/test_admin_kinds_browser.py takes them, on every run, as it
checks the page (so they cannot go stale): this runs that test alone. On Django 6.1 and later
it writes docs/img/admin-held-locks-{light,dark}.png and docs/img/admin-force-release.png;
with DIRECTORY it also keeps every width (1,100, 1,366 and 1,920 px) and theme it took there.
Needs Debian's chromium (apt-get install -y chromium) or DISTLOCK_CHROMIUM.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the clone, for its imports
from devkit.processes import child_env, run_process

TEST = "tests/admin/test_admin_kinds_browser.py"


def main() -> int:
    env = child_env(DISTLOCK_REQUIRE_BROWSER="1")
    if len(sys.argv) > 1:
        kept = Path(sys.argv[1]).resolve()
        kept.mkdir(parents=True, exist_ok=True)
        env["DISTLOCK_SCREENSHOT_DIR"] = str(kept)
    command = [sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider"]
    return run_process(command, env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
