/* placeholder: the stats page is being written */
int ts_statspage_placeholder(void);
int ts_statspage_placeholder(void) { return 0; }
