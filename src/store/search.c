/* search.c: being written */
