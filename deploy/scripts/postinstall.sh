#!/bin/sh
# After install or upgrade: let systemd see the unit. The node is not
# started here: the supplier first looks at /etc/gpumesh/node.toml and runs
# gpumesh doctor. An upgrade restarts a node that was running.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	if systemctl is-active --quiet gpumesh.service; then
		systemctl try-restart gpumesh.service || true
	fi
fi
echo "gpumesh: edit /etc/gpumesh/node.toml (join, region, prices), check the machine with"
echo "  gpumesh doctor --join <a peer's address>"
echo "then start the node with: systemctl enable --now gpumesh"
