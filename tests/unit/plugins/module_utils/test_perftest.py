# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/perftest.py (parse_ib_write_bw).

The captures below are real ib_write_bw/ib_send_bw outputs copied verbatim from public sources,
with their paste damage kept (it is the point):

* NVIDIA_SPARK: DGX Spark client, RoCE, GID index 3, --run_infinitely, Gb/sec. Source:
  github.com/NVIDIA/dgx-spark-playbooks nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md
  (commit 998f217a71dc550a6c1931f2b26a15eb707ca150), "Client-1 Output". The markdown expanded the TABs
  and hand-aligned the address lines.
* EUGR_SPARK: DGX Spark client, -q 4 -R --force-link IB, Gb/sec. Source: github.com/eugr/spark-vllm-docker
  docs/NETWORKING.md ("Benchmark connection").
* MB_TABS: ib_send_bw -D 100 -R over RoCE (mlx5_2, GID index 3), MB/sec, with the real TABs of
  REPORT_FMT ("\\t\\t   ") and of "rdma_cm QPs\\t :". A public GitHub markdown page found by content search.
* CPUFREQ: soft-RoCE ib_write_bw, MB/sec, with perftest's "Conflicting CPU frequency values detected"
  warning printed between the header and the row (a public README found by content search).

The formats themselves come from linux-rdma/perftest: RESULT_FMT/RESULT_FMT_G/REPORT_FMT
(src/perftest_parameters.h), ctx_print_test_info (src/perftest_parameters.c), BASIC_ADDR_FMT/
PERF_GID_FMT (src/perftest_communication.h).
"""

from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.perftest import (
    MIB_PER_GB,
    parse_ib_write_bw,
    to_gbps,
)

NVIDIA_SPARK = """\
nvidia@spark-bd26:~$ ib_write_bw -d rocep1s0f0 -i 1 -p 12000 -F --report_gbits 192.168.200.12 --run_infinitely
  WARNING: BW peak won't be measured in this run.
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF            Device         : rocep1s0f0
 Number of qps   : 1              Transport type : IB
 Connection type : RC             Using SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : ON
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 3
 Max inline data : 0[B]
 rdma_cm QPs     : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address:  LID 0000 QPN 0x0129 PSN 0x57279d RKey 0x184300 VAddr 0x00ec99bedad000
 GID:            00:00:00:00:00:00:00:00:00:00:255:255:192:168:200:13
 remote address: LID 0000 QPN 0x0129 PSN 0x531b7  RKey 0x184300 VAddr 0x00ffeec955d000
 GID:            00:00:00:00:00:00:00:00:00:00:255:255:192:168:200:12
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]    MsgRate[Mpps]
 65536      882805           0.00               92.57                0.176554
 65536      882802           0.00               92.57                0.176554
 65536      882791           0.00               92.57                0.176554
 65536      882791           0.00               92.56                0.176552
 65536      882821           0.00               92.57                0.176555
"""

EUGR_SPARK = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : rocep1s0f1
 Number of qps   : 4            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : ON
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : IB
 Max inline data : 0[B]
 rdma_cm QPs     : ON
 Data ex. method : rdma_cm
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x03ec PSN 0xb680ae
 local address: LID 0000 QPN 0x03ed PSN 0x808800
 local address: LID 0000 QPN 0x03ee PSN 0x5b694a
 local address: LID 0000 QPN 0x03ef PSN 0xe2efd1
 remote address: LID 0000 QPN 0x03eb PSN 0x75f6ee
 remote address: LID 0000 QPN 0x03ec PSN 0x436140
 remote address: LID 0000 QPN 0x03ed PSN 0x81698a
 remote address: LID 0000 QPN 0x03ee PSN 0x4a8b11
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      20000            111.72             111.71             0.213070
---------------------------------------------------------------------------------------
"""

MB_TABS = (
    "---------------------------------------------------------------------------------------\n"
    "                    Send BW Test\n"
    " Dual-port       : OFF\t\tDevice         : mlx5_2\n"
    " Number of qps   : 1\t\tTransport type : IB\n"
    " Connection type : RC\t\tUsing SRQ      : OFF\n"
    " PCIe relax order: ON\n"
    " ibv_wr* API     : ON\n"
    " TX depth        : 128\n"
    " CQ Moderation   : 1\n"
    " Mtu             : 4096[B]\n"
    " Link type       : Ethernet\n"
    " GID index       : 3\n"
    " Max inline data : 0[B]\n"
    " rdma_cm QPs\t : ON\n"
    " Data ex. method : rdma_cm\n"
    "---------------------------------------------------------------------------------------\n"
    " local address: LID 0000 QPN 0x10008 PSN 0x85ddc9\n"
    " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:147\n"
    " remote address: LID 0000 QPN 0x10008 PSN 0x4df954\n"
    " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:126\n"
    "---------------------------------------------------------------------------------------\n"
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
    " 65536      9349389          0.00               11714.10\t\t   0.187426\n"
    "---------------------------------------------------------------------------------------\n"
)

CPUFREQ = (
    "---------------------------------------------------------------------------------------\n"
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
    "Conflicting CPU frequency values detected: 3902.477000 != 400.000000. CPU Frequency is not max.\n"
    " 65536      5000             419.30             361.10 \t\t   0.005778\n"
    "---------------------------------------------------------------------------------------\n"
)


def test_nvidia_spark_capture():
    result = parse_ib_write_bw(NVIDIA_SPARK)
    assert result['unit'] == 'Gb/sec'
    assert len(result['rows']) == 5
    assert (result['bytes'], result['iterations']) == (65536, 882821)
    assert result['bw_average'] == pytest.approx(92.57)
    assert result['gbps_average'] == pytest.approx(92.57)
    assert result['bw_peak'] == 0.0 and result['peak_measured'] is False
    assert result['msg_rate'] == pytest.approx(0.176555)
    assert result['test'] == 'RDMA_Write BW Test'
    assert result['device'] == 'rocep1s0f0'
    assert result['gid_index'] == 3
    assert result['link_type'] == 'Ethernet'
    assert result['mtu'] == 1024
    assert result['qps'] == 1
    assert result['tx_depth'] == 128
    assert result['cq_moderation'] == 1
    assert result['connection_type'] == 'RC'
    assert result['transport_type'] == 'IB'
    assert result['data_exchange_method'] == 'Ethernet'
    assert result['rdma_cm_qps'] == 'OFF'
    assert result['role'] == 'client'
    assert result['local_ipv4'] == '192.168.200.13'
    assert result['remote_ipv4'] == '192.168.200.12'
    assert result['local_gid'] == '0000:0000:0000:0000:0000:ffff:c0a8:c80d'
    assert result['warnings'] == ["WARNING: BW peak won't be measured in this run."]


def test_eugr_spark_capture_four_qps():
    result = parse_ib_write_bw(EUGR_SPARK)
    assert (result['bytes'], result['iterations']) == (65536, 20000)
    assert (result['bw_peak'], result['bw_average'], result['msg_rate']) == (111.72, 111.71, 0.213070)
    assert result['qps'] == 4
    assert result['link_type'] == 'IB'
    assert result['gid_index'] is None           # rdma_cm run without -x: no GID index line
    assert result['local_gid'] is None
    assert result['data_exchange_method'] == 'rdma_cm'
    assert result['peak_measured'] is True


def test_mb_per_sec_with_real_tabs():
    result = parse_ib_write_bw(MB_TABS)
    assert result['unit'] == 'MB/sec'
    assert result['bw_average'] == 11714.10
    assert result['gbps_average'] == pytest.approx(11714.10 * 1048576 * 8 / 1e9)
    assert result['gbps_average'] == pytest.approx(98.27, abs=0.01)
    assert result['device'] == 'mlx5_2'
    assert result['rdma_cm_qps'] == 'ON'
    assert result['remote_ipv4'] == '192.168.1.126'
    assert result['test'] == 'Send BW Test'


def test_line_between_header_and_row():
    result = parse_ib_write_bw(CPUFREQ)
    assert result['unit'] == 'MB/sec'
    assert (result['bw_peak'], result['bw_average']) == (419.30, 361.10)
    assert result['gbps_peak'] == pytest.approx(419.30 / MIB_PER_GB)


@pytest.mark.parametrize('damage', [
    pytest.param(lambda t: t.replace('\n', '\r\n'), id='crlf'),
    pytest.param(lambda t: '\n'.join(line.expandtabs(8) for line in t.split('\n')), id='tabs-expanded'),
    pytest.param(lambda t: t.replace(' ', u'\u00a0'), id='nbsp'),
    pytest.param(lambda t: ''.join('    ' + line for line in t.splitlines(True)), id='indented'),
    pytest.param(lambda t: ''.join('# ' + line for line in t.splitlines(True)), id='commented'),
    pytest.param(lambda t: ''.join('> ' + line for line in t.splitlines(True)), id='quoted'),
    pytest.param(lambda t: t.replace('-' * 87 + '\n', ''), id='no-dashes'),
    pytest.param(lambda t: t.replace('11714.10\t\t   0.187426', '11714.10\n   0.187426'), id='wrapped-row'),
    pytest.param(lambda t: t.encode('utf-8'), id='bytes'),
])
def test_paste_damage(damage):
    result = parse_ib_write_bw(damage(MB_TABS))
    assert result['unit'] == 'MB/sec'
    assert (result['bytes'], result['iterations'], result['bw_average'], result['msg_rate']) == (
        65536, 9349389, 11714.10, 0.187426)
    assert result['device'] == 'mlx5_2'
    assert result['gid_index'] == 3
    assert result['remote_ipv4'] == '192.168.1.126'


def test_all_sizes_takes_last_row():
    text = ("---------------------------------------------------------------------------------------\n"
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            " 2          5000             0.11               0.11               6.897101\n"
            " 1024       5000             59.65              58.81              7.178529\n"
            " 8388608    5000             97.95              97.93  \t\t   0.001459\n"
            "---------------------------------------------------------------------------------------\n")
    result = parse_ib_write_bw(text)
    assert [row['bytes'] for row in result['rows']] == [2, 1024, 8388608]
    assert result['bytes'] == 8388608 and result['bw_average'] == 97.93


def test_cpu_util_column_and_extended_format():
    text = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]    CPU_Util[%]\n"
            " 2          5000           0.050000            0.049000            3.062500\t    12.50\n")
    result = parse_ib_write_bw(text)
    assert result['cpu_util'] == 12.5
    assert result['bw_average'] == 0.049


def test_server_side_is_recognised():
    text = ("\n************************************\n* Waiting for client to connect... *\n"
            "************************************\n" + EUGR_SPARK.replace(' TX depth        : 128\n', ''))
    result = parse_ib_write_bw(text)
    assert result['role'] == 'server'
    assert result['tx_depth'] is None


def test_missing_header_needs_default_unit():
    row = " 65536      5000             97.95              97.93  \t\t   0.186792\n"
    with pytest.raises(ValueError, match='no column header naming the unit'):
        parse_ib_write_bw(row)
    assert parse_ib_write_bw(row, default_unit='Gb/sec')['gbps_average'] == 97.93


@pytest.mark.parametrize('text, fragment', [
    ('', 'empty'),
    ('   \n\t\n', 'empty'),
    ('Segmentation fault (core dumped)\n', "first line: 'Segmentation fault (core dumped)'"),
    ('IB device mlx5_9 not found\n Unable to find the Infiniband/RoCE device\n', "'IB device mlx5_9 not found'"),
    ("Couldn't connect to 192.168.100.2:18515\nUnable to open file descriptor for socket connection"
     " Unable to init the socket connection\n", "Couldn't connect to 192.168.100.2:18515"),
    (EUGR_SPARK.split(' #bytes', maxsplit=1)[0], 'no result row'),
    (' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n', 'no result row'),
    (' 65536      5000    abc    97.93    0.18\n', 'no result row'),
])
def test_garbage_raises_value_error(text, fragment):
    with pytest.raises(ValueError) as excinfo:
        parse_ib_write_bw(text)
    assert fragment in str(excinfo.value)


def test_to_gbps():
    assert to_gbps(98.0, 'Gb/sec') == 98.0
    assert to_gbps(11682.0, 'MB/sec') == pytest.approx(98.0, abs=0.01)
    with pytest.raises(ValueError):
        to_gbps(1, 'KB/sec')


# perftest 6.22+ (commit 1d202bb, March 2024): RESULT_FMT of src/perftest_parameters.h says MiB/sec
MIB_FORM = (
    "---------------------------------------------------------------------------------------\n"
    "                    RDMA_Write BW Test\n"
    " Dual-port       : OFF\t\tDevice         : rocep1s0f1\n"
    " Number of qps   : 1\t\tTransport type : IB\n"
    " Connection type : RC\t\tUsing SRQ      : OFF\n"
    " PCIe relax order: ON\t\tLock-free      : OFF\n"
    " ibv_wr* API     : ON\t\tUsing DDP      : OFF\n"
    " TX depth        : 128\n"
    " CQ Moderation   : 1\n"
    " Mtu             : 4096[B]\n"
    " Link type       : Ethernet\n"
    " GID index       : 3\n"
    " Max inline data : 0[B]\n"
    " rdma_cm QPs\t : OFF\n"
    " Data ex. method : Ethernet\n"
    "---------------------------------------------------------------------------------------\n"
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
    " 65536      373584           0.00               11682.12\t\t   0.186914\n"
    "---------------------------------------------------------------------------------------\n"
)


def test_mib_per_sec_form_of_current_perftest():
    result = parse_ib_write_bw(MIB_FORM)
    assert result['unit'] == 'MiB/sec'
    assert result['gbps_average'] == pytest.approx(98.0, abs=0.01)
    assert result['device'] == 'rocep1s0f1' and result['gid_index'] == 3


def test_mib_header_missing_uses_the_default_unit():
    rows_only = " 65536      373584           0.00               11682.12\t\t   0.186914\n"
    assert parse_ib_write_bw(rows_only, default_unit='MiB/sec')['gbps_average'] == pytest.approx(98.0, abs=0.01)
    assert to_gbps(11682.0, 'MiB/sec') == pytest.approx(98.0, abs=0.01)
