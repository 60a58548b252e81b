# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred

_topology = deferred.Module('topology')


def cluster_topology(groups, hostvars, head_group="spark_head", worker_group="spark_workers", shape="direct", fabric_prefix=24):
    """The cluster's topology (see module_utils/topology.py); a bad shape fails naming the host and the rail."""
    try:
        return _topology.cluster_topology(groups, hostvars, head_group, worker_group, shape, fabric_prefix)
    except _topology.TopologyError as exc:
        raise AnsibleFilterError(str(exc))


def fanout_round(topology, holders, targets, refused=None, fanout=True):
    """One round of the checkpoint fan-out (see module_utils/topology.py): {target: {source, source_addr, dest_addr}}."""
    if not isinstance(topology, dict) or "nodes" not in topology:
        raise AnsibleFilterError("fanout_round: the input is %r, expected the preflight_topology fact" % (type(topology).__name__,))
    return _topology.fanout_round(topology, list(holders or []), list(targets or []), refused or {}, bool(fanout))


class FilterModule(object):
    """The cluster's topology, derived once."""

    def filters(self):
        return {"cluster_topology": cluster_topology, "fanout_round": fanout_round}
