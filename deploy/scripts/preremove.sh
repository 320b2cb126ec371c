#!/bin/sh
# Before removal (not before an upgrade): stop the node, which drains its
# jobs to other suppliers first, and disable it.
set -e
case "$1" in
	remove|purge|0)
		if [ -d /run/systemd/system ]; then
			systemctl disable --now gpumesh.service >/dev/null 2>&1 || true
		fi
		;;
esac
