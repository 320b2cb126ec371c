#!/bin/sh
# After removal: forget the unit. The data dir /var/lib/gpumesh (the node's
# identity and state) is kept; delete it by hand to start afresh.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
