# -*- coding: utf-8 -*-
"""Static check: every role task that touches a secret has ``no_log: true`` (and ``diff: false`` if it writes a file).

The rule (no sim, no ansible run; the YAML and the templates are read as text):

1. The secrets are the role options declared ``no_log: true`` in roles/*/meta/argument_specs.yml, plus the
   role-internal names (``__`` prefix) that say they hold one: token, api_key, password, secret (not those
   that name where it lives: ``*_file``, ``*_path``, ``*_dir``, ``*_state``, ``*_names``).
2. A name defined from a secret carries it too, to a fixed point: role vars and defaults, task and block
   ``vars:``, ``set_fact`` keys, and the ``register`` of a task that touches a secret (a registered result
   holds the module's arguments). Reading variables by pattern (``query('ansible.builtin.vars', *names)``
   where ``names`` came from a ``varnames`` pattern that can match a secret) counts as naming every secret.
3. A value given to an option that one of the collection's modules declares ``no_log=True`` is masked by the
   module itself (its result and its journal line), so that use does not count. A use is harmless when the
   value only passes through a sanitiser: ``| length``, ``| bool``, ``| hash``,
   an ``is`` test, or one of the collection's filters that never return the secret they are given (each
   listed below with the test that shows it). Such a use neither makes a task touch the secret nor carries it.
4. A task touches a secret when any of its strings (module arguments, ``vars``, ``when``, ``loop``, messages;
   not its name) or the template it renders uses one. It must have ``no_log: true`` (its own or an
   enclosing block's); a ``template``/``copy``/``lineinfile``/``blockinfile`` task must also have
   ``diff: false``.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / 'roles'

SECRET_WORD = re.compile(r'token|api_?key|password|passwd|secret')
WHERE_IT_LIVES = re.compile(r'_(file|path|dir|state|names|mode)$')

# Filters (and tests) whose result never holds the secret they are given.
SANITISERS = {
    'length': 'a count', 'count': 'a count', 'bool': 'a boolean', 'hash': 'a digest', 'checksum': 'a digest',
    # plugins/module_utils/inventory.py masks no_log options in every message (tests/unit/plugins/filter/test_inventory.py)
    'dgxspark.cluster.spec_problems': 'messages with secrets masked',
    'dgxspark.cluster.roles_spec_problems': 'spec_problems of each role: messages with secrets masked',
    # plugins/module_utils/vllm_cmd.py: the key is refused in argv (VllmConfigError) and never in the env, the
    # warnings or the problems (tests/unit/plugins/filter/test_vllm.py)
    'dgxspark.cluster.vllm_serve_argv': 'argv that refuses to hold the key',
    'dgxspark.cluster.vllm_serve_env': 'the non-secret environment',
    'dgxspark.cluster.vllm_serve_warnings': 'warnings naming knobs, not values',
    'dgxspark.cluster.vllm_api_problems': 'a message naming the knob, not its value',
    # where vLLM listens and whether the API proxy fronts it: addresses and ports (test_vllm.py test_api_layout_never_holds_the_key)
    'dgxspark.cluster.vllm_api_layout': 'addresses and ports, never the key',
}
FILE_WRITERS = {'template', 'copy', 'lineinfile', 'blockinfile'}
TASK_KEYWORDS_WITH_TASKS = ('block', 'rescue', 'always')


def _spec_secrets():
    names = set()
    for spec_file in ROLES.glob('*/meta/argument_specs.yml'):
        spec = yaml.safe_load(spec_file.read_text(encoding='utf-8'))
        for entry in (spec.get('argument_specs') or {}).values():
            for name, option in (entry.get('options') or {}).items():
                if option.get('no_log'):
                    names.add(name)
    return names


def _text(value):
    """Every string in ``value`` (dict keys included), joined by newlines."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return '\n'.join(_text(k) + '\n' + _text(v) for k, v in value.items())
    if isinstance(value, list):
        return '\n'.join(_text(v) for v in value)
    return ''


def _module(task):
    for key in task:
        if key.startswith('ansible.builtin.') or key.startswith('dgxspark.cluster.') or '.' not in key and key in (
                'template', 'copy', 'set_fact', 'command', 'shell', 'lineinfile', 'blockinfile'):
            return key.rsplit('.', 1)[-1]
    return None


def _tasks(entries, inherited_no_log=False, path=()):
    """(task, no_log in force, block path) for every task, blocks flattened."""
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        no_log = bool(entry.get('no_log', inherited_no_log))
        if any(k in entry for k in TASK_KEYWORDS_WITH_TASKS):
            yield entry, no_log, path, True
            for key in TASK_KEYWORDS_WITH_TASKS:
                yield from _tasks(entry.get(key), no_log, path + (entry.get('name', '(block)'),))
        else:
            yield entry, no_log, path, False


def _task_files():
    for pattern in ('*/tasks/*.yml', '*/handlers/*.yml'):
        for task_file in sorted(ROLES.glob(pattern)):
            yield task_file, yaml.safe_load(task_file.read_text(encoding='utf-8')) or []


def _skip_parens(text, i):
    """Index after the balanced (...) or [...] starting at text[i]."""
    pairs = {'(': ')', '[': ']'}
    stack = [pairs[text[i]]]
    i += 1
    while i < len(text) and stack:
        c = text[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c == stack[-1]:
            stack.pop()
        elif c in '\'"':
            end = text.find(c, i + 1)
            i = end if end >= 0 else len(text)
        i += 1
    return i


def _sanitised_after(text, end):
    """The filter chain after text[:end] reaches a sanitiser (or an ``is`` test) before it ends."""
    i = end
    while True:
        m = re.compile(r'\s*(\.\w+|\[)').match(text, i)  # an attribute or item of the value: still the value
        if m:
            i = _skip_parens(text, m.end() - 1) if m.group(1) == '[' else m.end()
            continue
        break
    while True:
        m = re.compile(r'\s*\|\s*([\w.]+)').match(text, i)
        if not m:
            return bool(re.compile(r'\s*is\s+(not\s+)?\w+').match(text, i))
        if m.group(1) in SANITISERS or 'dgxspark.cluster.' + m.group(1) in SANITISERS:
            return True
        i = m.end()
        if i < len(text) and text[i] == '(':
            i = _skip_parens(text, i)


def _sanitised(text, start, end):
    """The use at text[start:end] only reaches a sanitiser: its filter chain, or an enclosing call or group's."""
    if _sanitised_after(text, end):
        return True
    depth = 0
    for i in range(start - 1, -1, -1):
        c = text[i]
        if c in ')]':
            depth += 1
        elif c in '([':
            if depth:
                depth -= 1
                continue
            if c == '(':
                callee = re.search(r'([\w.]+)\s*$', text[:i])
                if callee and (callee.group(1) in SANITISERS):
                    return True
                if _sanitised_after(text, _skip_parens(text, i)):
                    return True
        elif text.startswith('{{', i) or text.startswith('{%', i):
            return False
    return False


def _unsafe_uses(text, secrets, wholesale):
    uses = []
    for name in secrets:
        for m in re.finditer(r'(?<![\w.\'"])%s(?!\w)' % re.escape(name), text):
            if not _sanitised(text, m.start(), m.end()):
                uses.append(name)
                break
    for m in re.finditer(r'(?:query|lookup)\(\s*\'ansible\.builtin\.vars\'\s*,\s*\*?(\w+)', text):
        if m.group(1) in wholesale:
            call_end = _skip_parens(text, text.index('(', m.start()))
            if not (_sanitised_after(text, call_end) or _sanitised(text, m.start(), m.start())):
                uses.append("every variable matching %s's pattern" % m.group(1))
    return uses


def _wholesale_names(definitions, secrets):
    """Names defined by a ``varnames`` query whose pattern can match a secret (or is built at run time)."""
    found = set()
    for name, text in definitions:
        for m in re.finditer(r'ansible\.builtin\.varnames\'\s*,\s*(.+?)\)\s*(?:\}\}|\+|\||$)', text, re.S):
            arg = m.group(1).strip()
            literal = re.fullmatch(r"'([^']*)'", arg)
            if literal:
                if any(re.match(literal.group(1), s) for s in secrets):
                    found.add(name)
            elif not arg.endswith(")$'"):  # an alternation of exact names ends in )$
                found.add(name)
    return found


def _definitions():
    """(name, text that defines it) for role vars/defaults, task/block vars, set_fact keys, registers."""
    defs = []
    for var_file in list(ROLES.glob('*/vars/main.yml')) + list(ROLES.glob('*/defaults/main.yml')):
        for name, value in (yaml.safe_load(var_file.read_text(encoding='utf-8')) or {}).items():
            defs.append((name, _text(value)))
    registers = []
    for task_file, tasks in _task_files():
        for task in (entry[0] for entry in _tasks(tasks)):
            for name, value in (task.get('vars') or {}).items():
                defs.append((name, _text(value)))
            facts = task.get('ansible.builtin.set_fact') or task.get('set_fact')
            if isinstance(facts, dict):
                for name, value in facts.items():
                    if name != 'cacheable':
                        defs.append((name, _text(value)))
            if task.get('register'):
                registers.append((task['register'], task, task_file.parents[1]))
    return defs, registers


@functools.lru_cache(maxsize=None)
def _module_no_log_options(root):
    """{module: options it declares no_log=True}: the collection's modules mask those values themselves."""
    found = {}
    for source in (root / 'plugins' / 'modules').glob('*.py'):
        names = re.findall(r'(\w+)=dict\([^()]*no_log=True', source.read_text(encoding='utf-8'))
        if names:
            found['dgxspark.cluster.' + source.stem] = set(names)
    return found


def _task_text(task, role_dir):
    body = {k: v for k, v in task.items() if k not in ('name',) + TASK_KEYWORDS_WITH_TASKS}
    for module, options in _module_no_log_options(ROLES.parent).items():
        if isinstance(body.get(module), dict):
            body[module] = {k: v for k, v in body[module].items() if k not in options}
    text = _text(body)
    module = _module(task)
    if module == 'template':
        args = task.get('ansible.builtin.template') or task.get('template')
        src = args.get('src') if isinstance(args, dict) else None
        if src and '{{' not in src and (role_dir / 'templates' / src).is_file():
            text += '\n' + (role_dir / 'templates' / src).read_text(encoding='utf-8')
    return text


def secrets_and_carriers():
    spec = _spec_secrets()
    defs, registers = _definitions()
    secrets = set(spec)
    for name in [d[0] for d in defs] + [r[0] for r in registers]:
        if name.startswith('__') and SECRET_WORD.search(name) and not WHERE_IT_LIVES.search(name):
            secrets.add(name)
    wholesale = _wholesale_names(defs, spec)
    while True:
        grown = {name for name, text in defs if name not in secrets and _unsafe_uses(text, secrets, wholesale)}
        for reg, task, role_dir in registers:
            if reg not in secrets and _unsafe_uses(_task_text(task, role_dir), secrets | grown, wholesale):
                grown.add(reg)
        if not grown:
            return spec, secrets, wholesale
        secrets |= grown


def findings():
    spec, secrets, wholesale = secrets_and_carriers()
    problems = []
    for task_file, tasks in _task_files():
        role_dir = task_file.parents[1]
        rel = task_file.relative_to(ROLES.parent)
        for task, no_log, path, is_block in _tasks(tasks):
            if is_block:
                continue
            uses = _unsafe_uses(_task_text(task, role_dir), secrets, wholesale)
            if not uses:
                continue
            label = '%s: %s' % (rel, ' / '.join(path + (task.get('name', '(unnamed)'),)))
            if not no_log:
                problems.append('%s uses %s without no_log: true' % (label, ', '.join(sorted(uses))))
            if _module(task) in FILE_WRITERS and task.get('diff') is not False:
                problems.append('%s writes %s to a file without diff: false' % (label, ', '.join(sorted(uses))))
    return spec, secrets, problems


def test_every_task_that_touches_a_secret_hides_it():
    problems = findings()[2]
    assert not problems, '\n'.join(problems)


def test_the_rule_sees_the_secrets_it_must():
    """The rule is not vacuous: it finds the declared secrets and the names that carry them."""
    spec, secrets = findings()[:2]
    assert {'runtime_vllm_api_key', 'checkpoint_hf_token'} <= spec
    assert {'__runtime_transfer_token', '__runtime_vllm_knobs'} <= secrets
    assert not any(WHERE_IT_LIVES.search(s) for s in secrets - spec)


@pytest.mark.parametrize('text,unsafe', [
    ('{{ runtime_vllm_api_key }}', True),
    ('{{ runtime_vllm_api_key | trim }}', True),
    ("{{ 'x' ~ runtime_vllm_api_key }}", True),
    ('{{ runtime_vllm_api_key | length > 0 }}', False),
    ('runtime_vllm_api_key | length > 0', False),
    ('{{ runtime_vllm_api_key is defined }}', False),
    ("{{ __runtime_vllm_knobs | dgxspark.cluster.vllm_api_problems | join(' | ') }}", False),
    ('{{ __runtime_vllm_knobs | to_json | hash("sha256") }}', False),
    ('{{ spec_problems(a, b, __runtime_vllm_knobs) }}', True),  # not the collection's filter name
    ('{{ x | dgxspark.cluster.spec_problems(a, __runtime_vllm_knobs) }}', False),
    ('{{ (runtime_vllm_api_key ~ "x") | length }}', False),
    ('runtime_vllm_api_key_file', False),
])
def test_a_use_is_unsafe_unless_it_only_reaches_a_sanitiser(text, unsafe):
    assert bool(_unsafe_uses(text, {'runtime_vllm_api_key', '__runtime_vllm_knobs'}, set())) is unsafe


def test_a_task_without_no_log_is_found(tmp_path, monkeypatch):
    role = tmp_path / 'roles' / 'r'
    (role / 'tasks').mkdir(parents=True)
    (role / 'meta').mkdir()
    (role / 'templates').mkdir()
    (role / 'meta' / 'argument_specs.yml').write_text(
        'argument_specs:\n  main:\n    options:\n      r_key: {type: str, no_log: true}\n')
    (role / 'templates' / 'k.j2').write_text('KEY={{ r_key }}\n')
    (role / 'tasks' / 'main.yml').write_text(
        '- name: Derive\n  ansible.builtin.set_fact:\n    __r_header: "Bearer {{ r_key }}"\n  no_log: true\n'
        '- name: Leak\n  ansible.builtin.debug:\n    msg: "{{ __r_header }}"\n'
        '- name: Write\n  ansible.builtin.template:\n    src: k.j2\n    dest: /x\n  no_log: true\n'
        '- name: Fine\n  ansible.builtin.debug:\n    msg: "{{ r_key | length }}"\n')
    monkeypatch.setattr(sys.modules[__name__], 'ROLES', role.parent)
    problems = findings()[2]
    assert problems == ['roles/r/tasks/main.yml: Leak uses __r_header without no_log: true',
                        'roles/r/tasks/main.yml: Write writes r_key to a file without diff: false'], problems
