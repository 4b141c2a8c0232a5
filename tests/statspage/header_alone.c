/* include/tessera/stats_page.h compiles on its own (C11, -pedantic), with nothing before it. */
#include "tessera/stats_page.h"

int main(void)
{
    tessera_page_slot_head head = {0};
    uint64_t seq = 0;
    tessera_seq_write_begin(&seq);
    tessera_stat_store(&head.stats.num_ops, 1);
    tessera_seq_write_end(&seq);
    uint64_t s = tessera_seq_read_begin(&seq);
    return (int)(tessera_seq_read_retry(&seq, s) + (seq != 2) + (head.stats.num_ops != 1));
}
