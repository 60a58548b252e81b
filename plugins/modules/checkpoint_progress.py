#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_progress
short_description: Measure a running checkpoint download (bytes done of total, rate, time left)
version_added: 0.1.0
description:
  - Waits O(wait) seconds, then sums the bytes under the repo folder's C(blobs/) (finished blobs and
    C(*.incomplete) ones) and compares them with O(total_bytes) and with the previous sample.
  - Meant to be called in a loop beside an asynchronous C(hf download); reads only.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  repo_dir:
    description: The repo folder in the hub cache (C(.../models--<org>--<name>)).
    type: path
    required: true
  total_bytes:
    description: The size of the checkpoint (from the hub's listing).
    type: int
    required: true
  wait:
    description: Seconds to wait before measuring.
    type: int
    default: 0
  previous_bytes:
    description: Bytes at the previous sample (for the rate).
    type: int
  previous_time:
    description: Epoch seconds of the previous sample.
    type: float
"""

EXAMPLES = r"""
- name: Measure the download
  dgxspark.cluster.checkpoint_progress:
    repo_dir: /var/lib/dgxspark/hf/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731
    total_bytes: 166900000000
    wait: 30
    previous_bytes: "{{ previous.done | default(omit) }}"
    previous_time: "{{ previous.time | default(omit) }}"
  register: previous
"""

RETURN = r"""
done:
  description: Bytes under blobs/ now.
  type: int
  returned: always
total:
  description: O(total_bytes).
  type: int
  returned: always
percent:
  description: done / total, in percent.
  type: float
  returned: always
rate:
  description: Bytes per second since the previous sample (null without one).
  type: float
  returned: always
eta:
  description: Seconds left at that rate (null when unknown).
  type: float
  returned: always
time:
  description: Epoch seconds of this sample.
  type: float
  returned: always
msg:
  description: The sample as one line.
  type: str
  returned: always
  sample: 12.3 GB of 166.9 GB (7.4%), 105.0 MB/s, 24 min 32 s left
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_dir=dict(type="path", required=True),
            total_bytes=dict(type="int", required=True),
            wait=dict(type="int", default=0),
            previous_bytes=dict(type="int"),
            previous_time=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    sample = hf_cache.wait_and_measure(params["repo_dir"], params["total_bytes"], max(0, params["wait"]),
                                       params["previous_bytes"], params["previous_time"])
    module.exit_json(changed=False, **sample)


if __name__ == "__main__":
    main()
