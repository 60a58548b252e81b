# The newest controller (scripts/controller-newest.sh): a thin layer on the sim's debootstrap
# base image (Debian 13, its python3 3.13 and python3-venv, openssh-client, rsync: the node image
# without the hardware stand-ins) with requirements-newest.txt in a venv, installed from the wheels the script
# downloaded on the host (no Python package index reached from the build), and git from the
# Debian mirror the sim's base image came from (ansible-test requires it; a DGX OS head has it).
ARG BASE
FROM ${BASE}
ARG MIRROR=http://deb.debian.org/debian
ARG SUITE=trixie
RUN set -eux; \
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n' "$MIRROR" "$SUITE" >/etc/apt/sources.list.d/controller-debian.sources; \
    apt-get update -q -o Dir::Etc::SourceList=/etc/apt/sources.list.d/controller-debian.sources \
        -o Dir::Etc::SourceParts=/nonexistent -o APT::Get::List-Cleanup=0; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o Dir::Etc::SourceList=/etc/apt/sources.list.d/controller-debian.sources -o Dir::Etc::SourceParts=/nonexistent git; \
    rm -f /etc/apt/sources.list.d/controller-debian.sources; apt-get clean
COPY requirements-newest.txt /opt/ansible-newest.txt
COPY wheels/ /tmp/wheels/
RUN set -eux; \
    python3 -m venv /opt/ansible-newest; \
    /opt/ansible-newest/bin/pip install -q --no-index --find-links /tmp/wheels --disable-pip-version-check \
        -r /opt/ansible-newest.txt; \
    rm -rf /tmp/wheels /root/.cache/pip
ENV PATH=/opt/ansible-newest/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ANSIBLE_NOCOLOR=1 PYTHONDONTWRITEBYTECODE=1
CMD ["/bin/bash"]
