# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory sanity checks for a Spark cluster (pure functions, no I/O).

The inventory describes one head (rank 0) and N workers, each with fabric
rails::

    spark_head:    {hosts: {spark-head: {dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: 192.168.100.1}]}}}
    spark_workers: {hosts: {spark-worker: {dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: 192.168.100.2}]}}}

``inventory_problems`` returns one message per problem, each naming the host,
the variable, what was found and what was expected; an empty list means sane.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

RAILS_VAR = "dgxspark_fabric_rails"


def _text(value):
    try:
        return u"%s" % (value,)
    except Exception:  # pragma: no cover - defensive: repr of odd objects
        return repr(value)


def rail_problems(host, rails, fabric_prefix=24):
    """Problems with one host's ``dgxspark_fabric_rails`` value."""
    problems = []
    if not isinstance(rails, (list, tuple)) or isinstance(rails, (str, bytes)):
        return ["%s: %s is %r (%s), expected a list of {netdev, ipv4}" % (host, RAILS_VAR, rails, _kind(rails))]
    if not rails:
        return ["%s: %s is empty, expected at least one rail {netdev, ipv4}" % (host, RAILS_VAR)]
    for idx, rail in enumerate(rails):
        where = "%s: %s[%d]" % (host, RAILS_VAR, idx)
        if not isinstance(rail, dict):
            problems.append("%s is %r, expected a dict with netdev and ipv4" % (where, rail))
            continue
        netdev = rail.get("netdev")
        if not isinstance(netdev, str) or not netdev.strip():
            problems.append("%s.netdev is %r, expected the fabric netdev name (for example enp1s0f1np1)" % (where, netdev))
        ipv4 = rail.get("ipv4")
        try:
            ipaddress.IPv4Address(_text(ipv4))
        except (ipaddress.AddressValueError, ValueError):
            problems.append("%s.ipv4 is %r, expected an IPv4 address (for example 192.168.100.1)" % (where, ipv4))
    return problems


def inventory_problems(groups, hostvars, play_hosts, head_group="spark_head", worker_group="spark_workers", fabric_prefix=24):
    """All problems with the cluster inventory, as messages.

    ``groups`` and ``hostvars`` are Ansible's magic variables; ``play_hosts``
    limits the per-host checks to the hosts of the play.
    """
    problems = []
    heads = list(groups.get(head_group, []) or [])
    workers = [h for h in (groups.get(worker_group, []) or []) if h not in heads]
    both = [h for h in (groups.get(worker_group, []) or []) if h in heads]
    if len(heads) != 1:
        problems.append("inventory: group %s has %d hosts (%s), expected exactly one head"
                        % (head_group, len(heads), ", ".join(heads) or "none"))
    if not workers:
        problems.append("inventory: group %s has no hosts, expected at least one worker" % worker_group)
    for host in both:
        problems.append("%s: is in both %s and %s, expected one role per node" % (host, head_group, worker_group))
    if not isinstance(fabric_prefix, int) or isinstance(fabric_prefix, bool) or not 8 <= fabric_prefix <= 30:
        problems.append("inventory: dgxspark_fabric_prefix is %r, expected an integer between 8 and 30" % (fabric_prefix,))
        fabric_prefix = 24
    seen = {}
    subnets = {}
    for host in heads + workers:
        if host not in play_hosts:
            continue
        hvars = hostvars[host]
        if RAILS_VAR not in hvars:
            problems.append("%s: %s is not set, expected a list of {netdev, ipv4} (the fabric addresses)" % (host, RAILS_VAR))
            continue
        rails = hvars[RAILS_VAR]
        host_problems = rail_problems(host, rails, fabric_prefix)
        problems.extend(host_problems)
        if host_problems:
            continue
        for idx, rail in enumerate(rails):
            addr = ipaddress.IPv4Address(_text(rail["ipv4"]))
            if addr in seen:
                problems.append("%s: %s[%d].ipv4 %s is also %s's address, expected unique fabric addresses"
                                % (host, RAILS_VAR, idx, addr, seen[addr]))
            else:
                seen[addr] = host
            net = ipaddress.IPv4Network(u"%s/%d" % (addr, fabric_prefix), strict=False)
            first = subnets.setdefault(idx, (net, host))
            if first[0] != net:
                problems.append("%s: %s[%d].ipv4 %s is outside %s (rail %d of %s), expected one subnet per rail"
                                % (host, RAILS_VAR, idx, addr, first[0], idx, first[1]))
    return problems


_TYPE_NAMES = {
    "bool": "a boolean (true or false, unquoted)",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "path": "a path (string)",
    "raw": "any value",
    "list": "a list",
    "dict": "a dict",
}


def _kind(value):
    """A plain name of a value's type (Ansible wraps strings in tagged subclasses)."""
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                       (dict, "dict"), ((list, tuple), "list")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _type_ok(kind, value):
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("str", "path"):
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, (list, tuple))
    if kind == "dict":
        return isinstance(value, dict)
    return True


def spec_problems(host, role, options, values):
    """Strict type and choice checks of the variables a user set, against a role's argument spec.

    ``options`` is ``argument_specs.main.options`` of the role; ``values`` maps
    variable names to what the inventory gives. Ansible's own validation would
    turn ``"yes"`` into ``True`` and ``"24"`` into ``24``; a quoted boolean or
    number in an inventory is a mistake worth naming, so this check does not.
    """
    problems = []
    for name in sorted(values):
        spec = options.get(name)
        if spec is None:
            continue
        value = values[name]
        kind = spec.get("type", "str")
        if value is None and not spec.get("required"):
            continue
        if not _type_ok(kind, value):
            hint = ""
            if isinstance(value, str) and kind in ("bool", "int", "float"):
                hint = "; on the command line pass JSON: -e '{\"%s\": ...}'" % name
            problems.append("%s: %s is %r (%s), expected %s (role %s%s)"
                            % (host, name, value, _kind(value), _TYPE_NAMES.get(kind, kind), role, hint))
            continue
        choices = spec.get("choices")
        if choices and kind != "list" and value not in choices:
            problems.append("%s: %s is %r, expected one of %s (role %s)"
                            % (host, name, value, ", ".join(str(c) for c in choices), role))
        elements = spec.get("elements")
        if kind == "list" and elements:
            for idx, item in enumerate(value):
                if not _type_ok(elements, item):
                    problems.append("%s: %s[%d] is %r (%s), expected %s (role %s)"
                                    % (host, name, idx, item, _kind(item), _TYPE_NAMES.get(elements, elements), role))
                elif choices and item not in choices:
                    problems.append("%s: %s[%d] is %r, expected one of %s (role %s)"
                                    % (host, name, idx, item, ", ".join(str(c) for c in choices), role))
    return problems
