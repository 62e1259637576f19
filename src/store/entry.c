/* entry.c: being written */
