"""The host side of a together run: every host starts one piece of work at one absolute time, each on its
own clock (start.py). The controller's side, the clocks' offsets and the spread of the starts, is
disklab.together and the collection's ``lab_clock`` action."""
