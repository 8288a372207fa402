from brokerbench.worker.consumer import Accounting


def test_counts_distinct_duplicates_and_reordering():
    acc = Accounting()
    for seq in [0, 1, 2, 2, 5, 4, 3, 6]:
        acc.add(producer=1, seq=seq, partition=0)
    assert acc.received_from(1) == 7
    assert acc.duplicated == 1
    assert acc.out_of_order == 2  # 4 and 3 came after 5; the second 2 is a duplicate, not a reordering
    assert acc.received_from(1, 3, 7) == 4


def test_producers_and_partitions_are_separate():
    acc = Accounting()
    for producer in (0, 1):
        for seq in range(3000):  # past the initial bitmap size
            acc.add(producer, seq, partition=seq % 2)
    assert acc.received_from(0) == acc.received_from(1) == 3000
    assert acc.duplicated == acc.out_of_order == 0
    assert acc.received_from(2) == 0
