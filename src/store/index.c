/* index.c: being written */
