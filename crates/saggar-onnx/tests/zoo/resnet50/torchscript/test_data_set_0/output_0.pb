
Boutput_0J(ß¾? z?OPÌ¿J­”¿hDu¾ä+u¿DÓù¿Há¢>ÀùÂ>y2>