/* placeholder: being written */
int ts_placeholder_tree(void);
int ts_placeholder_tree(void) { return 0; }
