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

import difflib
import ipaddress
import re

from ansible_collections.dgxspark.cluster.plugins.module_utils.topology import group_problems, prefix_ok, topology_problems

RAILS_VAR = "dgxspark_fabric_rails"

# Variables with these prefixes belong to the collection: one no spec declares is a typo.
COLLECTION_PREFIXES = ("nic_", "driver_", "cuda_", "clock_cap_", "checkpoint_", "runtime_", "service_", "preflight_", "validate_", "benchmark_",
                       "dgxspark_")
# A path knob may not be one of these (the top level of the tree; /lib* too).
SYSTEM_DIRS = ("etc", "usr", "bin", "sbin", "boot", "proc", "sys", "dev", "run", "var", "home", "root", "tmp")
SYSTEM_DIRS_SHOWN = SYSTEM_DIRS[:4] + ("lib*",) + SYSTEM_DIRS[4:]
# Path knobs where "" means "derived" or "none".
EMPTY_PATHS = ("runtime_hf_hub_cache", "checkpoint_ca_bundle")
# Paths the collection only reads below (never creates, chowns or writes): a top-level system directory is their
# normal value (nic_sysfs_root: /sys).
READ_ONLY_ROOTS = ("nic_sysfs_root",)
SECRET_SUFFIXES = ("_token", "_api_key", "_password")
_LIB_RE = re.compile(r"^lib(32|64|x32)?$")
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@=,-]*$")
_SECRET_RE = re.compile(r"^[A-Za-z0-9!#%&()*+,./:;<=>?@\[\]^_{|}~-]*$")
_RANGE_RE = re.compile(r"^Range: (-?[0-9]+(?:\.[0-9]+)?)?\.\.(-?[0-9]+(?:\.[0-9]+)?)?\.?$")
_NAME = (re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$"), "letters, digits, _ . @ - (not first)")
_UNIT = (re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@:-]*\.(service|target|socket|mount|timer)$"),
         "a systemd unit name (letters, digits, _ . @ : -, ending in .service, .target, ...)")
_REPO_OR_PATH = (re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/[A-Za-z0-9._/+@=,-]+)$"),
                 "a hub repo id (owner/name: letters, digits, . _ -) or an absolute path")
# Values that reach shell scripts, unit files, configs: their safe character sets.
CHARSET_RULES = {
    "checkpoint_user": _NAME,
    "runtime_user": _NAME,
    "runtime_group": _NAME,
    "runtime_compose_project": (re.compile(r"^[a-z0-9][a-z0-9_-]*$"), "lower-case letters, digits, _ - (compose's rule)"),
    "runtime_container_name": _NAME,
    "runtime_vllm_served_model_name": (re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@/:+-]*$"), "letters, digits, _ . @ / : + -"),
    "runtime_vllm_model": _REPO_OR_PATH,
    "runtime_vllm_host": (re.compile(r"^[A-Za-z0-9.:-]+$"), "an IP address or host name"),
    "checkpoint_repo_id": (_REPO_OR_PATH[0], "a hub repo id (owner/name: letters, digits, . _ -)"),
    "checkpoint_revision": (re.compile(r"^[A-Za-z0-9._/-]*$"), "a commit sha, branch or tag"),
    "runtime_vllm_revision": (re.compile(r"^[A-Za-z0-9._/-]*$"), "a commit sha, branch or tag"),
    "service_unit_name": _UNIT,
    "clock_cap_unit_name": _UNIT,
    "clock_cap_before_units": _UNIT,
    "service_after_units": _UNIT,
    "checkpoint_ssh_cipher": (re.compile(r"^[A-Za-z0-9@.-]+$"), "an ssh cipher name"),
    "checkpoint_hf_endpoint": (re.compile(r"^(https?://[A-Za-z0-9._:/@%-]+)?$"), "an http(s) URL"),
}
NETDEV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")


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
        elif not NETDEV_RE.match(netdev):
            problems.append("%s.netdev is %r, expected a netdev name (at most 15 letters, digits, _ . -)" % (where, netdev))
        ipv4 = rail.get("ipv4")
        try:
            ipaddress.IPv4Address(_text(ipv4))
        except (ipaddress.AddressValueError, ValueError):
            problems.append("%s.ipv4 is %r, expected an IPv4 address (for example 192.168.100.1)" % (where, ipv4))
    return problems


def inventory_problems(groups, hostvars, play_hosts, head_group="spark_head", worker_group="spark_workers", fabric_prefix=24,
                       fabric_shape="direct"):
    """All problems with the cluster inventory, as messages.

    ``groups`` and ``hostvars`` are Ansible's magic variables; ``play_hosts``
    limits the per-host checks to the hosts of the play. Once every host's rails are well-formed, the cluster's
    shape (``fabric_shape``: the subnets, which node reaches which) is topology.topology_problems', the code that
    derives the topology every role reads.
    """
    problems, heads, workers = group_problems(groups, head_group, worker_group, fabric_shape, fabric_prefix)
    if not prefix_ok(fabric_prefix):
        fabric_prefix = 24  # the rails are still checked, against the usual /24
    seen = {}
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
    if not problems and all(host in play_hosts for host in heads + workers):
        problems.extend(topology_problems(groups, hostvars, head_group, worker_group, fabric_shape, fabric_prefix)[0])
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


def _secret(name, spec):
    """A variable whose value no message may show (no_log in the spec, or named like a token/key)."""
    return bool(spec.get("no_log")) or name.endswith(SECRET_SUFFIXES)


def _show(name, spec, value):
    """The value as a message shows it: a secret's as ****."""
    return "****" if _secret(name, spec) else "%r" % (value,)


def _range_of(spec):
    """(low, high) from the spec's description line ``Range: LOW..HIGH`` (either side may be empty); None when absent.

    >>> _range_of({"description": ["Seconds.", "Range: 1..65535"]})
    (1, 65535)
    >>> _range_of({"description": "Range: 0.5.."})
    (0.5, None)
    """
    desc = spec.get("description") or []
    if isinstance(desc, str):
        desc = [desc]
    for line in desc:
        match = _RANGE_RE.match(line.strip()) if isinstance(line, str) else None
        if match:
            low, high = (None if not g else (float(g) if "." in g else int(g)) for g in match.groups())
            return low, high
    return None


def _bounds_text(low, high):
    if low is not None and high is not None:
        return "between %s and %s" % (low, high)
    if low is not None:
        return "at least %s" % (low,)
    return "at most %s" % (high,)


def path_problem(value, allow_empty=False, read_only=False):
    """What is wrong with a path knob's value (a phrase), or None.

    >>> path_problem("/var/lib/dgxspark/huggingface/hub") is None
    True
    >>> path_problem("/")
    'the root directory'
    >>> path_problem("/srv/../etc")
    'not normalised (no ., .., doubled or trailing slash)'
    """
    if not isinstance(value, str):
        return None  # the type check names it
    if value == "":
        return None if allow_empty else "empty"
    if not value.startswith("/"):
        return "not absolute"
    if value == "/":
        return "the root directory"
    if not _PATH_RE.match(value):
        return "has characters outside the safe set (letters, digits, / . _ + @ = , -)"
    parts = value.split("/")[1:]
    if value.endswith("/") or "" in parts or "." in parts or ".." in parts:
        return "not normalised (no ., .., doubled or trailing slash)"
    if len(parts) == 1 and (parts[0] in SYSTEM_DIRS or _LIB_RE.match(parts[0])) and not read_only:
        return "a top-level system directory"
    return None


def value_problem(name, spec, value):
    """Character-set and path problems of one (type-correct) value, as a phrase, or None."""
    kind = spec.get("type", "str")
    if kind == "path":
        return path_problem(value, name in EMPTY_PATHS, name in READ_ONLY_ROOTS)
    items = value if kind == "list" and spec.get("elements") == "str" else [value]
    for item in items:
        if not isinstance(item, str):
            continue
        if _secret(name, spec):
            if not _SECRET_RE.match(item):
                return "has a character outside the safe set for a secret (printable ASCII without spaces, quotes, " \
                       "backslash, $ or `)"
            continue
        if any(c in item for c in "\r\n\0"):
            return "contains a line break or NUL, expected a one-line value"
        rule = CHARSET_RULES.get(name)
        if rule and item != "" and not rule[0].match(item):
            return "has characters outside %s" % rule[1]
    return None


def spec_problems(host, role, options, values):
    """Strict type, choice, range, path and character checks of the variables a user set, against a role's spec.

    ``options`` is ``argument_specs.main.options`` of the role; ``values`` maps
    variable names to what the inventory gives. Ansible's own validation would
    turn ``"yes"`` into ``True`` and ``"24"`` into ``24``; a quoted boolean or
    number in an inventory is a mistake worth naming, so this check does not.
    Ranges come from a ``Range: LOW..HIGH`` line of the option's description;
    ``type: path`` options must be absolute, normalised and not ``/`` or a
    top-level system directory. A secret's value (``no_log``) is never shown.
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
            problems.append("%s: %s is %s (%s), expected %s (role %s%s)"
                            % (host, name, _show(name, spec, value), _kind(value), _TYPE_NAMES.get(kind, kind), role, hint))
            continue
        choices = spec.get("choices")
        if choices and kind != "list" and value not in choices:
            problems.append("%s: %s is %s, expected one of %s (role %s)"
                            % (host, name, _show(name, spec, value), ", ".join(str(c) for c in choices), role))
        bounds = _range_of(spec) if kind in ("int", "float") else None
        if bounds and ((bounds[0] is not None and value < bounds[0]) or (bounds[1] is not None and value > bounds[1])):
            problems.append("%s: %s is %r, expected %s (role %s)" % (host, name, value, _bounds_text(*bounds), role))
        bad = value_problem(name, spec, value)
        if bad:
            expected = ("expected an absolute, normalised path below a top-level directory, not / nor one of %s"
                        % ", ".join("/" + d for d in SYSTEM_DIRS_SHOWN)) if kind == "path" else "expected a safe value"
            problems.append("%s: %s is %s: %s; %s (role %s)" % (host, name, _show(name, spec, value), bad, expected, role))
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


def roles_spec_problems(host, specs, roles, values):
    """spec_problems of each role of ``roles``, in order, each over the variables of ``values`` with its prefix.

    ``specs`` maps a role to its ``argument_specs.main.options``: preflight reads the files once per run and checks
    every role of a host in one task (a loop of one task per role cost ~1 s of the controller's CPU in every run).
    """
    problems = []
    for role in roles:
        prefix = role + "_"
        problems += spec_problems(host, role, specs[role], {name: value for name, value in values.items() if name.startswith(prefix)})
    return problems


def unknown_variables(host, names, declared, prefixes=COLLECTION_PREFIXES):
    """Messages for variables with one of the collection's prefixes that no argument spec declares.

    ``names`` are the variables the host sees (inventory and -e), ``declared`` every option name of every role's
    spec. The closest declared name is offered.

    >>> unknown_variables("h", ["nic_rebot_ok", "nic_mtu", "other"], ["nic_reboot_ok", "nic_mtu"])
    ['h: nic_rebot_ok is set (inventory or -e) but no role declares it: did you mean nic_reboot_ok?']
    """
    declared = sorted(set(declared))
    problems = []
    for name in sorted(set(names)):
        if not name.startswith(tuple(prefixes)) or name in declared:
            continue
        close = difflib.get_close_matches(name, declared, 1, 0.6)
        hint = ("did you mean %s?" % close[0]) if close else \
            "expected one of the variables in roles/<role>/meta/argument_specs.yml (README lists them)"
        problems.append("%s: %s is set (inventory or -e) but no role declares it: %s" % (host, name, hint))
    return problems
