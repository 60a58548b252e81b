#!/bin/sh
# What a node has, for uninstall.yml's before/after comparison (prepare.yml takes "before", before the first
# site.yml; tests/test_uninstall.py takes the others): every file outside /proc, /sys, /run, /dev and the volatile
# places below (type, owner, mode), the content of every file under /etc, /usr/local and /opt, the unit files and
# their states, every package with its version and dpkg state (holds included), users and groups.
# Usage: node_snapshot.sh OUTPUT   (as root)
set -eu
out=${1:?usage: node_snapshot.sh OUTPUT}
{
  echo "## files"
  find / -xdev \( -path /proc -o -path /sys -o -path /run -o -path /dev -o -path /tmp -o -path /var/tmp \
       -o -path /var/log -o -path /var/cache -o -path /var/lib/apt/lists -o -path /var/lib/dpkg \
       -o -path /var/lib/systemd -o -path /root/.ansible -o -path '/home/*/.ansible' -o -path /var/lib/spark-sim \
       -o -name __pycache__ \) -prune -o -printf 'file %p %y %u:%g %m\n' | sort
  echo "## contents"
  find /etc /usr/local /opt -xdev -type f -exec sha256sum {} + | awk '{print "content " $2 " " $1}' | sort
  echo "## units"
  systemctl list-unit-files --no-legend --no-pager | awk '{print "unit " $1 " " $2}' | sort
  echo "## packages"
  dpkg-query -W -f 'package ${binary:Package} ${Version} ${db:Status-Abbrev}\n' | sort
  echo "## users and groups"
  getent passwd | awk -F: '{print "user " $1 " " $3 ":" $4 " " $6 " " $7}' | sort
  getent group | awk -F: '{print "group " $1 " " $3 " " $4}' | sort
} > "$out"
