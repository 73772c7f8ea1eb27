
BlogitsJ(þKn>ÔK¿IÏ¿OþÏ?0ü¾”Lõ¾a›ï>:hP¿ßüC¿$âÉ¾