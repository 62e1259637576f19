/* store.c: being written */
